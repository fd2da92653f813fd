"""The soak's section of docs/reliability.md, between two markers: ``make soak`` writes it, and
``make chaos``, which writes the rest of that file, keeps it."""

from __future__ import annotations

BEGIN, END = "<!-- soak:begin -->", "<!-- soak:end -->"


def with_section(text: str, section: str) -> str:
    """``text`` with its soak section replaced by ``section`` (appended if it has none)."""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        return head + section.rstrip("\n") + rest.split(END, 1)[1]
    return text.rstrip("\n") + "\n\n" + section


def section_of(text: str) -> str:
    """The soak section of ``text``, or an empty string."""
    if BEGIN in text and END in text:
        return BEGIN + text.split(BEGIN, 1)[1].split(END, 1)[0] + END + "\n"
    return ""
