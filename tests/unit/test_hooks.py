"""The hook registry (shared.hooks) and the reference app's lock key, without a database."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from webhooks import tables
from webhooks.ledger import hooks as ledger_hooks
from webhooks.shared import hooks
from webhooks.shared.payloads import Unloadable


def test_a_provider_without_a_lock_key_has_none() -> None:
    assert hooks.lock_key_of("test-no-lock-key", {"data": {"object": {"customer": "c"}}}) \
        is None


def test_a_second_lock_key_for_one_provider_is_an_error() -> None:
    @hooks.lock_key("test-lock-twice")
    def first(payload: Any) -> hooks.LockKey:
        return hooks.LockKey("a")

    hooks.lock_key("test-lock-twice")(first)  # the same function again: a module reloaded
    with pytest.raises(ValueError, match="test-lock-twice"):
        @hooks.lock_key("test-lock-twice")
        def second(payload: Any) -> hooks.LockKey:
            return hooks.LockKey("b")
    assert hooks.lock_key_of("test-lock-twice", {}) == hooks.LockKey("a")


def test_the_ledgers_lock_key_is_the_customer_else_the_object_ordered_by_customer_currency_id(
) -> None:
    def key(obj: Any) -> hooks.LockKey | None:
        return hooks.lock_key_of("stripe", {"data": {"object": obj}})

    assert key({"customer": "cus_1", "currency": "EUR", "id": "in_1"}) == \
        hooks.LockKey("cus_1", ("cus_1", "eur", "in_1"))
    assert key({"customer": None, "id": "ch_guest"}) == \
        hooks.LockKey("ch_guest", ("", "", "ch_guest"))
    for no_object in ("not an object", None):
        assert key(no_object) == hooks.LockKey("", ("", "", ""))
    assert ledger_hooks.customer_first(Unloadable("{", "bad")) == hooks.LockKey("", ("", "", ""))
    assert hooks.LockKey("k").sort_key() == ("k",)


def test_effects_add_up_in_registration_order_and_only_for_their_provider() -> None:
    one = hooks.Section(key="one", title="One", label="one", columns=(), text="{n}")

    @hooks.effects("test-effects")
    def first(conn: Any, event: hooks.Event) -> list[hooks.Section]:
        return [one.with_rows([{"n": 1}])]

    @hooks.effects("test-effects")
    def second(conn: Any, event: hooks.Event) -> list[hooks.Section]:
        return [one.with_rows([])]

    hooks.effects("test-effects")(first)  # registered once however often imported
    event = hooks.Event("test-effects", "evt_1", "thing.happened", {})
    assert [s.value() for s in hooks.effects_of(None, event)] == [[{"n": 1}], []]  # type: ignore[arg-type]
    assert hooks.effects_of(None, hooks.Event("test-none", "e", "t", {})) == []  # type: ignore[arg-type]


def test_a_single_row_section_is_its_row_or_none() -> None:
    section = hooks.Section(key="s", title="S", label="s", columns=(), text="{a}", single=True)
    assert section.value() is None
    assert section.with_rows([{"a": 1}]).value() == {"a": 1}


def test_show_prints_a_section_under_its_label_with_times_formatted() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC)
    many = ledger_hooks.LEDGER.with_rows([{
        "customer_id": "cus_1", "currency": "usd", "amount": -250, "kind": "refund",
        "reference": "ch_1", "entry_key": "refund:ch_1:250", "created_at": at}])
    single = ledger_hooks.SUBSCRIPTION.with_rows([{
        "subscription_id": "sub_1", "customer_id": "cus_1", "status": "active",
        "last_event_id": "evt_1", "updated_at": at}])
    assert tables._section_lines(many) == [
        "ledger        ", "  -250 usd cus_1  refund ch_1  (refund:ch_1:250)"]
    assert tables._section_lines(ledger_hooks.LEDGER) == ["ledger        none"]
    assert tables._section_lines(single) == [
        "subscription  sub_1 of cus_1: active (last event evt_1, "
        "updated 2026-01-02 03:04:05+00:00)"]
    assert tables._section_lines(ledger_hooks.SUBSCRIPTION) == ["subscription  none"]


def test_a_second_audit_check_of_one_name_is_an_error() -> None:
    @hooks.audit_check("test-audit", "rows")
    def rows(conn: Any, since: datetime | None) -> list[hooks.Finding]:
        return [hooks.Finding("row 1 is wrong", {"t": {"id": 1}})]

    with pytest.raises(ValueError, match="rows"):
        @hooks.audit_check("test-audit", "rows")
        def other(conn: Any, since: datetime | None) -> list[hooks.Finding]:
            return []
    assert ("test-audit", "rows") in hooks.audit_checks()
    hooks._audit_checks.pop(("test-audit", "rows"))  # an audit of a real database would run it
