"""The only code that talks to the EVM.

    chain = connect()                      # in-process eth-tester (py-evm)
    chain = connect("http://127.0.0.1:8545")   # anvil, or any EVM chain
    probe = chain.deploy("ChainProbe", 10**15, sender=chain.dev_accounts[0])
    probe.transact("store", 1, 2, sender=chain.dev_accounts[0])
    probe.call("values", 1)

See docs/chain.md.
"""

from verillm.chain.backends import EthTesterChain, RpcChain, compute_anvil_accounts, connect
from verillm.chain.chain import Chain, ChainConfig, ContractHandle
from verillm.chain.deploy import CallStep, DeployContext, Deployment, DeployStep, deploy_plan
from verillm.chain.errors import ChainTimeout, ChainUnavailable, TransactionReverted
from verillm.chain.events import ChainEvent, EventPoller, get_events
from verillm.chain.protocol import PROTOCOL_STEPS

__all__ = [
    "CallStep", "Chain", "ChainConfig", "ChainEvent", "ChainTimeout", "ChainUnavailable", "ContractHandle",
    "DeployContext", "DeployStep", "Deployment", "EthTesterChain", "EventPoller", "PROTOCOL_STEPS", "RpcChain",
    "TransactionReverted",
    "compute_anvil_accounts", "connect", "deploy_plan", "get_events",
]
