"""``numlearn.evaluation.sandbox`` is ``numlearn.sandbox`` (the same module object, so a patch of one is a patch of
the other): the OS sandbox moved to the bottom floor, where the evaluator and the data derivations that run
programs (``numlearn.data.gsm8k_pot``) both reach it. Import ``numlearn.sandbox`` in new code."""

import sys

from numlearn import sandbox as _sandbox

sys.modules[__name__] = _sandbox
