"""kiln.tensor.optim: optimizers (SGD, Adam, AdamW, LAMB, RMSprop), gradient clipping and learning-rate schedules,
with PyTorch's names, defaults and update rules. Every `step()` realizes all updates in one schedule."""

from kiln.tensor.optim import lr_scheduler
from kiln.tensor.optim.adam import LAMB, Adam, AdamW
from kiln.tensor.optim.clip import clip_grad_norm_, clip_grad_value_
from kiln.tensor.optim.optimizer import SGD, Optimizer
from kiln.tensor.optim.rmsprop import RMSprop

__all__ = [
    "LAMB",
    "SGD",
    "Adam",
    "AdamW",
    "Optimizer",
    "RMSprop",
    "clip_grad_norm_",
    "clip_grad_value_",
    "lr_scheduler",
]
