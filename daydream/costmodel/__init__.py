"""Cost models: GPU specs (:mod:`.gpus`), collective costs (:mod:`.comm`), gpu-upgrade's per-kernel
rules (:mod:`.kernel_model`), and the kernel-cost library: a kernel's time on another GPU, at
another precision or another shape.

Public API (times in ns; arrays of one row per kernel):

* :class:`~daydream.costmodel.work.Kernels` (``Kernels.make(...)``): kernels as a trace records them.
* :func:`~daydream.costmodel.specs.find_spec`, :func:`~daydream.costmodel.specs.resolve`,
  :func:`~daydream.costmodel.specs.from_config`: GPUs.
* :func:`~daydream.costmodel.model.predict_cross`: measured on one GPU -> another GPU / precision.
* :func:`~daydream.costmodel.model.predict_shape`: measured at one shape -> another shape, same GPU.
* :func:`~daydream.costmodel.model.predict_model`: the model alone (fitted efficiency).
* :class:`~daydream.costmodel.model.Prediction`: ``low <= point <= high`` per kernel; ``total()``.

Mechanisms, constants and their sources: :mod:`daydream.costmodel.model`; fitting:
:mod:`daydream.costmodel.fit`; accuracy: :mod:`daydream.costmodel.accuracy` and docs/kernels.md.
"""

from .model import Constants, Prediction, default_constants, predict_cross, predict_model, predict_shape
from .specs import Spec, find_spec, from_config, resolve
from .work import Kernels

__all__ = ["Constants", "Kernels", "Prediction", "Spec", "default_constants", "find_spec", "from_config",
           "predict_cross", "predict_model", "predict_shape", "resolve"]
