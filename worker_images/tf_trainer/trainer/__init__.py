"""Squall's TensorFlow trainer: a DCGAN with minibatch discrimination.

Run as ``python -m trainer``. The package is its own image and never imports
``squall``: the only contract with the control plane is the environment it sets
(TF_CONFIG, SQUALL_CHECKPOINT_URI, SQUALL_OUTPUT_URI, SQUALL_PARAM_*) and the exit
codes in ``trainer.exits``.
"""

__version__ = "1.0.0"
