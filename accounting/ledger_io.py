"""The JSON form of a ledger (format ``leakaudit.ledger/1``): the full per-step history,
floats round-trip exactly; events rebuilt by type (:func:`accounting.events.event_from_dict`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .events import event_from_dict
from .relations import ADD_REMOVE

__all__ = ["LEDGER_FORMAT", "LedgerJSON"]

LEDGER_FORMAT = "leakaudit.ledger/1"


class LedgerJSON:
    """to_dict / to_json / save and from_dict / from_json / load of
    :class:`accounting.PrivacyLedger` (through its ``relation``, ``orders``, ``events`` and
    ``from_events``)."""

    def to_dict(self) -> dict[str, Any]:
        return {"format": LEDGER_FORMAT, "relation": self.relation,
                "orders": self.orders.tolist(), "events": [e.to_dict() for e in self.events]}

    def to_json(self, **kwargs: Any) -> str:
        """The full per-step history as JSON (floats round-trip exactly)."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        if not isinstance(data, dict) or data.get("format") != LEDGER_FORMAT:
            raise ValueError(f"not a ledger: expected format {LEDGER_FORMAT!r}")
        events = data.get("events", [])
        if not isinstance(events, list):
            raise ValueError("ledger 'events' must be a list")
        return cls.from_events((event_from_dict(item) for item in events),
                               relation=data.get("relation", ADD_REMOVE),
                               orders=data.get("orders"))

    @classmethod
    def from_json(cls, text: str) -> Any:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"text is not valid JSON: {exc}") from exc
        return cls.from_dict(data)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(indent=1))

    @classmethod
    def load(cls, path: str | Path) -> Any:
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"path {str(p)!r} does not exist or is not a file")
        return cls.from_json(p.read_text())

