"""``K8sRetryPlugin``: the failures page, mounted on the api-server and linked from the UI's menu,
and the listener that deletes the pod of a task a user kills (:mod:`airflow_k8s_retry.kills.listener`).

Registered through the ``airflow.plugins`` entry point of this distribution, so installing the
package is enough: ``airflow plugins`` lists it, the api-server serves ``/k8s-retry/``, and the UI
shows "Kubernetes pod failures" under Browse, opening the page inside the UI.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_k8s_retry.kills import listener
from airflow_k8s_retry.plugins.app import create_app

URL_PREFIX = "/k8s-retry"
MENU_NAME = "Kubernetes pod failures"


class K8sRetryPlugin(AirflowPlugin):
    name = "airflow_k8s_retry"
    listeners = [listener]
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": MENU_NAME}]
    external_views = [
        {
            "name": MENU_NAME,
            # Relative to the UI's base URL, so it works under a sub-path too.
            "href": URL_PREFIX.lstrip("/") + "/",
            "destination": "nav",
            "category": "browse",
            "url_route": "k8s-retry",
        }
    ]
