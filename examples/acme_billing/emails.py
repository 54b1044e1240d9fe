"""What Acme's emails say: subject, plain text and HTML."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

ZERO_DECIMAL = frozenset("bif clp djf gnf jpy kmf krw mga pyg rwf ugx vnd vuv xaf xof xpf".split())


@dataclass(frozen=True)
class Email:
    subject: str
    text_body: str
    html_body: str


def money(minor_units: int, currency: str) -> str:
    """2500, "usd" -> "25.00 USD" (Stripe's amounts are in the currency's minor unit)."""
    if currency.lower() in ZERO_DECIMAL:
        return f"{minor_units:,} {currency.upper()}"
    return f"{minor_units / 100:,.2f} {currency.upper()}"


def thanks(invoice_id: str, amount: int, currency: str) -> Email:
    paid = money(amount, currency)
    return Email(
        subject=f"Thank you for your payment of {paid}",
        text_body=f"Acme received {paid} for invoice {invoice_id}. Thank you!\n",
        html_body=(f"<p>Acme received <strong>{escape(paid)}</strong> for invoice "
                   f"{escape(invoice_id)}. Thank you!</p>"),
    )
