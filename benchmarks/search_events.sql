-- The search benchmark's events (benchmarks/search.py): bench_stripe_event(n), the n-th of
-- a deterministic stream of Stripe-shaped events of 1-2 KB (invoices, charges,
-- subscriptions) over 50,000 customers with names and emails. Every event holds one word
-- no other event holds: its charge id (an invoice's `charge`, a charge's `id`) or, for a
-- subscription event, its `latest_invoice`. Common words: `usd` (70% of events), `visa`
-- (60% of charges), `paid`, `succeeded`.
CREATE OR REPLACE FUNCTION bench_stripe_event(n bigint) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
SELECT jsonb_build_object(
    'id', 'evt_1' || substr(h, 1, 23),
    'object', 'event',
    'api_version', '2024-06-20',
    'created', created,
    'livemode', true,
    'pending_webhooks', 1,
    'request', jsonb_build_object('id', 'req_' || substr(h2, 1, 14),
                                  'idempotency_key', substr(h3, 1, 8) || '-' ||
                                      substr(h3, 9, 4) || '-' || substr(h3, 13, 4)),
    'type', kind,
    'data', jsonb_build_object('object', CASE
        WHEN kind LIKE 'invoice.%' THEN jsonb_build_object(
            'id', 'in_1' || substr(h2, 1, 23), 'object', 'invoice',
            'account_country', 'US', 'account_name', 'Acme Analytics Inc.',
            'amount_due', amount, 'amount_paid', CASE WHEN kind = 'invoice.payment_failed'
                                                     THEN 0 ELSE amount END,
            'amount_remaining', 0, 'attempt_count', 1, 'attempted', true,
            'billing_reason', 'subscription_cycle', 'charge', 'ch_3' || substr(h3, 1, 23),
            'collection_method', 'charge_automatically', 'created', created,
            'currency', currency, 'customer', customer, 'customer_email', email,
            'customer_name', name,
            'customer_address', jsonb_build_object('city', city, 'country', 'US',
                                                   'line1', (n % 900 + 100) || ' Market Street',
                                                   'postal_code', lpad((n % 99999)::text, 5, '0')),
            'hosted_invoice_url', 'https://invoice.stripe.com/i/acct_1Nv0FGQ9RKHgCVdK/live_'
                                  || substr(h2, 1, 32),
            'invoice_pdf', 'https://pay.stripe.com/invoice/acct_1Nv0FGQ9RKHgCVdK/live_'
                           || substr(h2, 1, 32) || '/pdf',
            'number', upper(substr(h, 24, 8)) || '-' || lpad((n % 10000)::text, 4, '0'),
            'paid', kind <> 'invoice.payment_failed',
            'payment_intent', 'pi_3' || substr(h3, 1, 23),
            'period_start', created - 2592000, 'period_end', created,
            'status', CASE WHEN kind = 'invoice.payment_failed' THEN 'open' ELSE 'paid' END,
            'subscription', 'sub_1' || substr(hc, 1, 23),
            'subtotal', amount, 'tax', 0, 'total', amount,
            'lines', jsonb_build_object('object', 'list', 'has_more', false, 'total_count', 1,
                'url', '/v1/invoices/in_1' || substr(h2, 1, 23) || '/lines',
                'data', jsonb_build_array(jsonb_build_object(
                    'id', 'il_1' || substr(h2, 3, 23), 'object', 'line_item',
                    'amount', amount, 'currency', currency,
                    'description', '1 × ' || plan || ' (at ' || amount / 100 || '.00 / month)',
                    'price', jsonb_build_object('id', 'price_1' || substr(hp, 1, 23),
                                                'product', 'prod_' || substr(hp, 2, 14),
                                                'unit_amount', amount,
                                                'recurring', jsonb_build_object('interval', 'month')),
                    'quantity', 1,
                    'period', jsonb_build_object('start', created - 2592000, 'end', created)))))
        WHEN kind LIKE 'charge.%' THEN jsonb_build_object(
            'id', 'ch_3' || substr(h3, 1, 23), 'object', 'charge',
            'amount', amount, 'amount_captured', amount,
            'amount_refunded', CASE WHEN kind = 'charge.refunded' THEN amount ELSE 0 END,
            'balance_transaction', 'txn_3' || substr(h2, 1, 23),
            'billing_details', jsonb_build_object('email', email, 'name', name,
                'address', jsonb_build_object('city', city, 'country', 'US',
                                              'postal_code', lpad((n % 99999)::text, 5, '0'))),
            'calculated_statement_descriptor', 'ACME ANALYTICS', 'captured', true,
            'created', created, 'currency', currency, 'customer', customer,
            'description', 'Subscription update', 'invoice', 'in_1' || substr(h2, 1, 23),
            'outcome', jsonb_build_object('network_status', 'approved_by_network',
                                          'risk_level', 'normal', 'risk_score', n % 70,
                                          'seller_message', 'Payment complete.',
                                          'type', 'authorized'),
            'paid', true, 'payment_intent', 'pi_3' || substr(h3, 1, 23),
            'payment_method', 'pm_1' || substr(hc, 2, 23),
            'payment_method_details', jsonb_build_object('type', 'card',
                'card', jsonb_build_object('brand', brand, 'country', 'US',
                                           'exp_month', n % 12 + 1, 'exp_year', 2027 + n % 5,
                                           'fingerprint', substr(hc, 3, 16), 'funding', 'credit',
                                           'last4', lpad((n % 10000)::text, 4, '0'),
                                           'network', brand)),
            'receipt_email', email,
            'receipt_url', 'https://pay.stripe.com/receipts/payment/' || substr(h2, 1, 40),
            'refunded', kind = 'charge.refunded', 'status', 'succeeded')
        ELSE jsonb_build_object(
            'id', 'sub_1' || substr(hc, 1, 23), 'object', 'subscription',
            'customer', customer, 'status', CASE WHEN n % 9 = 0 THEN 'past_due'
                                                 ELSE 'active' END,
            'cancel_at_period_end', false, 'collection_method', 'charge_automatically',
            'created', created - 7776000, 'currency', currency,
            'current_period_start', created, 'current_period_end', created + 2592000,
            'default_payment_method', 'pm_1' || substr(hc, 2, 23),
            'latest_invoice', 'in_1' || substr(h3, 1, 23),
            'metadata', jsonb_build_object('plan', lower(plan), 'account_owner', email),
            'items', jsonb_build_object('object', 'list', 'has_more', false, 'total_count', 1,
                'data', jsonb_build_array(jsonb_build_object(
                    'id', 'si_' || substr(h2, 1, 14), 'object', 'subscription_item',
                    'price', jsonb_build_object('id', 'price_1' || substr(hp, 1, 23),
                                                'product', 'prod_' || substr(hp, 2, 14),
                                                'nickname', plan || ' monthly',
                                                'unit_amount', amount, 'currency', currency,
                                                'recurring', jsonb_build_object('interval', 'month')),
                    'quantity', 1))))
    END))
FROM (
    SELECT h, h2, h3, hc, hp, kind, created, amount, currency, customer, brand, plan, city,
           first || ' ' || last AS name,
           lower(first) || '.' || lower(last) || c || '@' || domain AS email
    FROM (
        SELECT md5(n::text) AS h, md5(n::text || 'b') AS h2, md5(n::text || 'c') AS h3,
               md5('customer' || (n % 50000)::text) AS hc,
               md5('plan' || (n % 3)::text) AS hp,
               n % 50000 AS c,
               'cus_' || substr(md5('customer' || (n % 50000)::text), 1, 14) AS customer,
               1767225600 + n AS created,
               (ARRAY[1900, 4900, 9900, 19900])[1 + (n % 4)::int] AS amount,
               (ARRAY['usd', 'usd', 'usd', 'usd', 'usd', 'usd', 'usd', 'eur', 'eur',
                      'gbp'])[1 + (n % 10)::int] AS currency,
               (ARRAY['visa', 'visa', 'visa', 'mastercard', 'amex'])[1 + (n % 5)::int] AS brand,
               (ARRAY['Starter', 'Pro', 'Business'])[1 + (n % 3)::int] AS plan,
               (ARRAY['invoice.paid', 'invoice.paid', 'invoice.paid', 'invoice.paid',
                      'invoice.paid', 'invoice.paid', 'invoice.payment_succeeded',
                      'invoice.payment_succeeded', 'invoice.payment_succeeded',
                      'invoice.payment_succeeded', 'invoice.payment_failed', 'charge.succeeded',
                      'charge.succeeded', 'charge.succeeded', 'charge.succeeded',
                      'charge.refunded', 'customer.subscription.updated',
                      'customer.subscription.updated', 'customer.subscription.updated',
                      'customer.subscription.created'])[1 + (n % 20)::int] AS kind,
               (ARRAY['Olivia', 'Liam', 'Emma', 'Noah', 'Ava', 'Elijah', 'Sophia', 'Mateo',
                      'Isabella', 'Lucas', 'Mia', 'Levi', 'Amelia', 'Ezra', 'Harper', 'Luca',
                      'Aiko', 'Ravi', 'Ingrid', 'Kwame'])[1 + ((n % 50000) % 20)::int] AS first,
               (ARRAY['Smith', 'Garcia', 'Johnson', 'Nguyen', 'Brown', 'Müller', 'Rossi',
                      'Kowalski', 'Tanaka', 'Okafor', 'Silva', 'Dubois', 'Larsen', 'Patel',
                      'Cohen', 'Novak', 'Murphy', 'Haddad', 'Kim', 'Jensen'])[
                   1 + ((n % 50000) / 20 % 20)::int] AS last,
               (ARRAY['gmail.com', 'outlook.com', 'yahoo.com', 'icloud.com', 'proton.me',
                      'acme-corp.io', 'fastmail.com', 'hey.com'])[1 + ((n % 50000) % 8)::int]
                   AS domain,
               (ARRAY['San Francisco', 'New York', 'Austin', 'Seattle', 'Chicago', 'Denver',
                      'Boston', 'Portland'])[1 + (n % 8)::int] AS city
    ) AS facts
) AS derived
$fn$;
