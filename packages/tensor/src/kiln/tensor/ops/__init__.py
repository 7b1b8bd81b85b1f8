"""The public Tensor methods, grouped by kind into mixins that `Tensor` inherits."""

from kiln.tensor.ops.activations import ActivationMixin
from kiln.tensor.ops.comparison import ComparisonMixin
from kiln.tensor.ops.creation import CreationMixin
from kiln.tensor.ops.decompositions import DecompositionMixin
from kiln.tensor.ops.elementwise import ElementwiseMixin
from kiln.tensor.ops.indexing import IndexingMixin
from kiln.tensor.ops.layout import LayoutMixin
from kiln.tensor.ops.linear_solve import LinearSolveMixin
from kiln.tensor.ops.metadata import MetadataMixin
from kiln.tensor.ops.movement import MovementMixin
from kiln.tensor.ops.nn import NNMixin
from kiln.tensor.ops.placement import PlacementMixin
from kiln.tensor.ops.reduce import ReduceMixin
from kiln.tensor.ops.sampling import SamplingMixin
from kiln.tensor.ops.scans import ScanMixin
from kiln.tensor.ops.selection import SelectionMixin
from kiln.tensor.ops.special import SpecialMixin
from kiln.tensor.ops.statistics import StatisticsMixin
from kiln.tensor.ops.trigonometric import TrigonometricMixin

__all__ = [
    "ActivationMixin",
    "ComparisonMixin",
    "TrigonometricMixin",
    "LayoutMixin",
    "ScanMixin",
    "DecompositionMixin",
    "SamplingMixin",
    "SelectionMixin",
    "StatisticsMixin",
    "PlacementMixin",
    "MetadataMixin",
    "SpecialMixin",
    "LinearSolveMixin",
    "CreationMixin",
    "ElementwiseMixin",
    "IndexingMixin",
    "MovementMixin",
    "NNMixin",
    "ReduceMixin",
]
