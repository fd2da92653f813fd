"""The simulator's API server, split as kube-apiserver is.

A request is parsed once (``requests``), goes through the gates in a real server's order
(``gates``: authentication, authorization, fault injection, audit), then to a verb handler
(``handlers``), a watch (``watch``), a pod subresource (``subresources``) or discovery
(``discovery``). What is special about a kind lives in its strategy: ``pods`` (validation,
defaulting and all of graceful deletion) and ``jobs``; ``validation`` checks object metadata;
``errors`` builds the ``Status`` bodies. ``server`` routes between them. It writes the store and
knows no controller: they learn from the store what it wrote.
"""
