"""Cost models: GPU specs (:mod:`.gpus`), collective costs (:mod:`.comm`), gpu-upgrade's per-kernel
rules (:mod:`.kernel_model`), and the kernel-cost library: a kernel's time on another GPU, at
another precision or another shape.

Public API (times in ns; arrays of one row per kernel):

* :class:`~daydream.costmodel.work.Kernels` (``Kernels.make(...)``): kernels as a trace records them.
* :func:`~daydream.costmodel.specs.find_spec`: GPUs by name (the command's
  :func:`~daydream.kernel_tool.configs.resolve` also takes device_configs JSON files).
* :func:`~daydream.costmodel.kernel_time.predict_cross`: measured on one GPU -> another GPU / precision.
* :func:`~daydream.costmodel.kernel_time.predict_shape`: measured at one shape -> another shape, same GPU.
* :func:`~daydream.costmodel.kernel_time.predict_model`: the model alone (fitted efficiency).
* :class:`~daydream.costmodel.kernel_time.Prediction`: ``low <= point <= high`` per kernel; ``total()``.

Mechanisms, constants and their sources: :mod:`daydream.costmodel.kernel_time`; fitting:
:mod:`daydream.costmodel.fit`; accuracy: :mod:`daydream.kernel_tool.accuracy` and docs/kernels.md.
"""

from .kernel_time import Constants, Prediction, default_constants, predict_cross, predict_model, predict_shape
from .specs import Spec, find_spec
from .work import Kernels

__all__ = ["Constants", "Kernels", "Prediction", "Spec", "default_constants", "find_spec",
           "predict_cross", "predict_model", "predict_shape"]
