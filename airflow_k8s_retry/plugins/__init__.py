"""The Airflow plugin of this package: a failures page in the Airflow UI, served by the api-server.

Nothing here is imported when a DAG imports the package; Airflow loads the plugin through the
``airflow.plugins`` entry point (see :mod:`airflow_k8s_retry.plugins.airflow_plugin`).
"""
