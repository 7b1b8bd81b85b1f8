"""kiln.tensor.optim: optimizers (SGD, Adam, AdamW, Adagrad, Adamax, NAdam, RAdam, RMSprop, LAMB, Adadelta, Rprop,
ASGD, and tinygrad's LARS and Muon), gradient clipping and learning-rate schedules, with PyTorch's names, defaults,
update rules, parameter groups and state dicts. Every `step()` realizes all updates in one schedule.

The schedules of `lr_scheduler_extra.py` (built on `lr_scheduler.LRScheduler`) are also reachable as
`optim.lr_scheduler.<name>`, as torch spells them: they are attached to the `lr_scheduler` module here, since
`lr_scheduler.py` importing them would be an import cycle."""

from kiln.tensor.optim import lr_scheduler
from kiln.tensor.optim.adam import LAMB, Adam, AdamW
from kiln.tensor.optim.adaptive import Adagrad, Adamax, NAdam, RAdam
from kiln.tensor.optim.checkpoint import load_training_checkpoint, save_training_checkpoint
from kiln.tensor.optim.classic import ASGD, Adadelta, Rprop
from kiln.tensor.optim.clip import clip_grad_norm_, clip_grad_value_
from kiln.tensor.optim.lars import LARS, Muon
from kiln.tensor.optim.lr_scheduler_extra import (
    ChainedScheduler,
    CosineAnnealingWarmRestarts,
    CyclicLR,
    MultiplicativeLR,
    ReduceLROnPlateau,
    SequentialLR,
)
from kiln.tensor.optim.optimizer import SGD, Optimizer, OptimizerGroup
from kiln.tensor.optim.param_group import ParamGroup
from kiln.tensor.optim.rmsprop import RMSprop

for _schedule in (
    ChainedScheduler, CosineAnnealingWarmRestarts, CyclicLR, MultiplicativeLR, ReduceLROnPlateau, SequentialLR
):  # fmt: skip
    setattr(lr_scheduler, _schedule.__name__, _schedule)

__all__ = [
    "ASGD",
    "LAMB",
    "LARS",
    "SGD",
    "Adadelta",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "Muon",
    "NAdam",
    "Optimizer",
    "OptimizerGroup",
    "ParamGroup",
    "RAdam",
    "RMSprop",
    "Rprop",
    "clip_grad_norm_",
    "clip_grad_value_",
    "load_training_checkpoint",
    "lr_scheduler",
    "save_training_checkpoint",
]
