"""`verillm node run` says what it is doing while it starts (issue 23: it was silent for 24-46 s
while loading): importing, loading the model and how long that took, then listening."""

from node_process import NodeProcess


def test_node_run_says_it_imports_and_loads_the_model_before_it_listens(tmp_path):
    node = NodeProcess(tmp_path)
    assert node.start()
    try:
        lines = node.log_path.read_text().splitlines()
    finally:
        assert node.stop() == 0
    steps = ["starting the node: importing", "loading model tiny (float32, engine torch)", " loaded in ", "verillm node listening on"]
    found = [next((i for i, line in enumerate(lines) if step in line), None) for step in steps]
    assert None not in found and found == sorted(found), "\n".join(lines)
