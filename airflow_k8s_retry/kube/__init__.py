"""I/O with the Kubernetes API: pods, events, logs and shared watches. Never imports Airflow."""
