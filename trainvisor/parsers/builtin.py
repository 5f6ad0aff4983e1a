"""Importing this module registers every built-in parser (one module per format family)."""
from . import caffe  # noqa: F401
from . import mxnet  # noqa: F401
from . import keras  # noqa: F401
from . import huggingface  # noqa: F401
from . import lightning  # noqa: F401
from . import pytorch  # noqa: F401
from . import detectron2  # noqa: F401
from . import mmdet  # noqa: F401
from . import tensorflow  # noqa: F401
from . import yolo  # noqa: F401
from . import darknet  # noqa: F401
from . import generic  # noqa: F401
from . import auto  # noqa: F401
