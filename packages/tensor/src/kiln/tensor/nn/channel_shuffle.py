"""`ChannelShuffle`: interleaves channel groups (ShuffleNet), like `torch.nn.ChannelShuffle`."""

from __future__ import annotations

from kiln.tensor.nn import functional as F
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["ChannelShuffle"]


class ChannelShuffle(Module):
    """Splits the channels of (N, C, *) into `groups` and interleaves them, like `torch.nn.ChannelShuffle`."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.groups = groups

    def forward(self, x: Tensor) -> Tensor:
        """F.channel_shuffle(x, groups)."""
        return F.channel_shuffle(x, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"
