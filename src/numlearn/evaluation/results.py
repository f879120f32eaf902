"""What a result file holds that follows from its generations alone: one function for ``numlearn.evaluate`` (the
result written after generating) and ``numlearn.evaluation.score`` (the same generations rescored)."""

from __future__ import annotations

from .metrics import compute_metrics, per_problem_scores


def result_fields(records: list[dict], answer_kind: str) -> dict:
    """``metrics``, ``correct_by_id`` and ``distance_by_id`` (empty for non-numeric answers) of scored generation
    rows: the ``ResultRecord`` fields a rescoring recomputes."""
    metrics = compute_metrics(records, answer_kind)
    scores = per_problem_scores(records, metrics)
    return {"metrics": metrics, "correct_by_id": scores["correct_by_id"],
            "distance_by_id": scores.get("distance_by_id", {})}
