"""Evaluation: answer extraction, comparators, sandboxed PoT execution, generation backends and
the resumable benchmark runner. Never imports training code.

    from numlearn.evaluation import extract_answer, is_correct, run_program
"""

from .extract import normalize_number
from .sandbox import ProgramResult, run_program
from .scorers import extract_answer, is_correct

__all__ = ["ProgramResult", "extract_answer", "is_correct", "normalize_number", "run_program"]
