"""Alerts: tell someone while an agent loops, stalls or burns money.

``routes`` is the API (destinations, rules, events); ``evaluator`` decides what
fires and commits it to the outbox (alert_events); ``delivery`` sends what is
in the outbox, at least once, to webhooks and Slack; ``destinations`` checks
where alerts may go (no SSRF) and renders what they receive.
"""
