"""A Flower ``Grid`` in this process, for tests and teaching: every node's ``ClientApp`` runs in turn.

It delivers Flower ``Message``\\ s to the ``ClientApp`` of each node with its own ``Context`` (node
config and persistent state), as a SuperLink does, without processes or a network; flwr's own
simulation runtime (``flwr run``) is what :mod:`fedmm.flower.app` uses. A node can be made to drop
its replies (``silent``), to see a server go on without it, or be gone (``gone``): the SuperLink then
answers for it, as Flower's does for a node that stopped sending heartbeats.
"""

import copy
import itertools

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.supercore.task_identity import TaskIdentity

__all__ = ["LocalGrid"]


class LocalGrid:
    """The nodes ``node_ids`` (default 1..K), node ``i`` running ``apps[i]`` with ``node_configs[i]``.

    Parameters
    ----------
    apps : list of flwr.clientapp.ClientApp
    node_configs : list of dict, optional
        Default ``{"partition-id": i}``.
    run_config : dict, optional
    """

    def __init__(self, apps, node_configs=None, run_config=None, node_ids=None):
        self.node_ids = list(node_ids or range(1, len(apps) + 1))
        node_configs = node_configs or [{"partition-id": i} for i in range(len(apps))]
        self.apps = dict(zip(self.node_ids, apps))
        self.contexts = {n: Context(run_id=1, node_id=n, node_config=c, state=RecordDict(), run_config=run_config or {})
                         for n, c in zip(self.node_ids, node_configs)}
        self.silent, self.gone = set(), set()
        self._ids = itertools.count(1)
        # Messages are created by the server's code in the identity of the server's task, as in a ServerApp.
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0

    def get_node_ids(self):
        return list(self.node_ids)

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = f"m{next(self._ids)}"  # what a SuperLink assigns
            node = message.metadata.dst_node_id
            if node in self.gone:
                reply = Message(Error(code=ErrorCode.NODE_UNAVAILABLE, reason="Node Unavailable"), reply_to=message)
                reply.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID
                replies.append(reply)
                continue
            try:
                # Each node gets its own copy, as over the network: a ClientApp may change what it receives
                # (SecAgg+'s mod pops its stage from the configs), and a server may send one record to many.
                reply = self.apps[node](copy.deepcopy(message), self.contexts[node])
            except Exception as error:  # what the ClientApp raised goes back as an error reply, as in Flower
                reply = Message(Error(code=0, reason=f"{type(error).__name__}: {error}"), reply_to=message)
            if node not in self.silent:
                replies.append(reply)
        return replies
