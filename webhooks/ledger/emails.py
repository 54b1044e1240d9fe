"""Email content: subject, plain text and HTML for each kind the ledger's handlers queue."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from html import escape

# ISO 4217 currencies whose minor unit is not 1/100 (Stripe's list of zero-decimal ones,
# and the three-decimal ones).
ZERO_DECIMAL = frozenset(
    "bif clp djf gnf jpy kmf krw mga pyg rwf ugx vnd vuv xaf xof xpf".split()
)
THREE_DECIMAL = frozenset("bhd jod kwd omr tnd".split())


@dataclass(frozen=True)
class Email:
    subject: str
    text_body: str
    html_body: str


def format_amount(minor_units: int, currency: str) -> str:
    """12345, "usd" -> "123.45 USD"."""
    code = currency.lower()
    digits = 0 if code in ZERO_DECIMAL else 3 if code in THREE_DECIMAL else 2
    value = Decimal(minor_units).scaleb(-digits)
    return f"{value:,.{digits}f} {code.upper()}"


def receipt(invoice_id: str, amount: int, currency: str) -> Email:
    money = format_amount(amount, currency)
    return Email(
        subject=f"Receipt for your payment of {money}",
        text_body=f"Thank you. We received your payment of {money} for invoice {invoice_id}.\n",
        html_body=(
            f"<p>Thank you. We received your payment of <strong>{escape(money)}</strong> "
            f"for invoice {escape(invoice_id)}.</p>"
        ),
    )


def payment_failed(invoice_id: str, amount: int, currency: str) -> Email:
    money = format_amount(amount, currency)
    return Email(
        subject=f"Your payment of {money} failed",
        text_body=(
            f"We could not collect your payment of {money} for invoice {invoice_id}. "
            "Please update your payment method.\n"
        ),
        html_body=(
            f"<p>We could not collect your payment of <strong>{escape(money)}</strong> for "
            f"invoice {escape(invoice_id)}. Please update your payment method.</p>"
        ),
    )
