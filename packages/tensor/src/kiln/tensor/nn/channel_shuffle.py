"""`ChannelShuffle`: interleaves channel groups (ShuffleNet), like `torch.nn.ChannelShuffle`."""

from __future__ import annotations

from kiln.tensor.nn import functional as F
from kiln.tensor.nn.applied import AppliedFunction

__all__ = ["ChannelShuffle"]


class ChannelShuffle(AppliedFunction, function=F.channel_shuffle, arguments=("groups",)):
    """Splits the channels of (N, C, *) into `groups` and interleaves them, like `torch.nn.ChannelShuffle`."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.groups = groups
