"""The Job strategy: what the API server defaults and checks in a new ``batch/v1`` Job.

The controller that runs Jobs is ``controllers/jobs.py``.
"""

from __future__ import annotations

from airflow_k8s_retry_testing.store import Obj

JOB_NAME_LABELS = ("job-name", "batch.kubernetes.io/job-name")
CONTROLLER_UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")


def default_job(job: Obj) -> None:
    """The API server's defaults for a new Job (its uid is set): selector, template labels, limits."""
    meta = job["metadata"]
    spec = job.setdefault("spec", {})
    uid, name = meta["uid"], meta["name"]
    spec.setdefault("parallelism", 1)
    if spec.get("completions") is None:
        spec["completions"] = 1
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    template = spec.setdefault("template", {})
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    for key in CONTROLLER_UID_LABELS:
        labels[key] = uid
    for key in JOB_NAME_LABELS:
        labels[key] = name
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    job["status"] = {}


def validate_job(job: Obj) -> list[tuple[str, str, str]]:
    """The checks the API server makes that a Job test is likely to meet (422 causes)."""
    spec = job.get("spec") or {}
    template = spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    causes: list[tuple[str, str, str]] = []
    policy = pod_spec.get("restartPolicy")
    if policy in (None, "", "Always"):
        # The pod template defaults to Always, so the API server treats it as missing.
        causes.append(
            (
                "FieldValueRequired",
                "spec.template.spec.restartPolicy",
                'Required value: valid values: "OnFailure", "Never"',
            )
        )
    elif policy not in ("Never", "OnFailure"):
        causes.append(
            (
                "FieldValueNotSupported",
                "spec.template.spec.restartPolicy",
                f'Unsupported value: "{policy}": supported values: "OnFailure", "Never"',
            )
        )
    if not pod_spec.get("containers"):
        causes.append(("FieldValueRequired", "spec.template.spec.containers", "Required value"))
    for key in ("backoffLimit", "parallelism", "completions", "activeDeadlineSeconds"):
        value = spec.get(key)
        if value is not None and (not isinstance(value, int) or value < 0):
            causes.append(("FieldValueInvalid", f"spec.{key}", "must be greater than or equal to 0"))
    return causes
