"""`verillm sim`: the network at scale, simulated over the project's own protocol code.

The simulator drives the spec (`verillm.spec.audit` draws and sortition,
`verillm.spec.settlement` money, `verillm.spec.params` presets) under an explicit rule set
(`verillm.sim.rules`), with the engines replaced by measured models of detection and cost
(`verillm.sim.inputs`). See docs/simulation.md.
"""
