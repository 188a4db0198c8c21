"""The networked dispatcher role's parts, in one object: for the status routes and tests.

`DispatchService` holds them; node/dispatcher_role.py assembles them from the app's resources and
installs the object under APP_SERVICE (the app layer: this folder never reads the app's keys).
"""

from verillm.node.dispatcher.chainio import ChainIO
from verillm.node.dispatcher.pruner import StorePruner
from verillm.node.dispatcher.router import NetworkDispatcher
from verillm.node.dispatcher.seats import SeatBook
from verillm.node.dispatcher.stakes import EpochStakes
from verillm.node.dispatcher.tasks import KeyedTasks
from verillm.node.dispatcher.watcher import ChainWatcher
from verillm.node.store.dispatcher_tables import DispatcherTables


class DispatchService:
    """Everything the networked dispatcher role runs, for the status route and tests."""

    def __init__(self, chainio: ChainIO, tables: DispatcherTables, router: NetworkDispatcher, watcher: ChainWatcher, tasks: KeyedTasks,
                 seats: SeatBook | None = None, pruner: StorePruner | None = None, stakes: EpochStakes | None = None,
                 chain_tasks: KeyedTasks | None = None):
        self.chainio, self.tables, self.router, self.watcher, self.tasks = chainio, tables, router, watcher, tasks
        self.chain_tasks = chain_tasks if chain_tasks is not None else tasks
        """The steps on the watcher's own thread (batches, omission answers); `tasks`: those on the main loop."""
        self.seats = seats
        """This node's committee seats, as the chain proves them: the committee lane (node/api/admission.py)."""
        self.pruner = pruner
        """Deletes the rows nothing can ask for any more, by the chain's head (node/store/retention.py)."""
        self.stakes = stakes
        """The peers' stake weights of the current epoch: each one's share of the peer lane (node/api/admission.py)."""
