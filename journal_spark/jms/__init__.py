"""The JMS bridge: journal routes to ActiveMQ destinations (egress) and JMS into broker topics (ingress).

Python talks to ActiveMQ over STOMP 1.2. The JMS semantics (TextMessage vs BytesMessage, properties,
header fields, selectors, durable subscriptions) are ActiveMQ's STOMP mapping of them; see
``mapping`` for the exact rules.
"""
