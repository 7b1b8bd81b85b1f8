"""kiln.tensor.optim: optimizers (SGD, Adam, AdamW, Adagrad, Adamax, NAdam, RAdam, RMSprop, LAMB, and tinygrad's LARS
and Muon), gradient clipping and learning-rate schedules, with PyTorch's names, defaults, update rules, parameter
groups and state dicts. Every `step()` realizes all updates in one schedule."""

from kiln.tensor.optim import lr_scheduler
from kiln.tensor.optim.adam import LAMB, Adam, AdamW
from kiln.tensor.optim.adaptive import Adagrad, Adamax, NAdam, RAdam
from kiln.tensor.optim.checkpoint import load_training_checkpoint, save_training_checkpoint
from kiln.tensor.optim.clip import clip_grad_norm_, clip_grad_value_
from kiln.tensor.optim.lars import LARS, Muon
from kiln.tensor.optim.optimizer import SGD, Optimizer, OptimizerGroup
from kiln.tensor.optim.param_group import ParamGroup
from kiln.tensor.optim.rmsprop import RMSprop

__all__ = [
    "LAMB",
    "LARS",
    "SGD",
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
    "clip_grad_norm_",
    "clip_grad_value_",
    "load_training_checkpoint",
    "lr_scheduler",
    "save_training_checkpoint",
]
