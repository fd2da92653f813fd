"""The watching tests' fixtures: kubeconfig files, a manual clock, hub settings."""

from __future__ import annotations

from tests.support.watch_fixtures import hub_settings, kubeconfig_file, manual_clock

__all__ = ["hub_settings", "kubeconfig_file", "manual_clock"]
