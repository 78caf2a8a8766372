"""The admin API (issue 31): operate the running gateway (docs/operations.md).

Doors and handlers are apart, as everywhere in the gateway:

- :mod:`gateway.admin.core`: what a handler sees and gives: a :class:`~.core.Call`
  (path parameters, query, JSON body, the authenticated :class:`~.core.Caller`) and a
  JSON-able document, or an :class:`~.core.AdminError` (status, message, the field at
  fault); paging, sorting and filtering of list results (:func:`~.core.page`).
- :mod:`gateway.admin.auth`: who may call it, in one module: HTTP Basic for users tagged
  ``administrator``, open mode from loopback only; other credential kinds plug in.
- :mod:`gateway.admin.audit`: every change, one JSON line (who, what, when, from where).
- :mod:`gateway.admin.address`: the admin address the gateway records in its data
  directory, read by the ``lmq`` CLI.
- one module per family of operations (:mod:`.overview`, :mod:`.connections`,
  :mod:`.topics`, :mod:`.groups`, :mod:`.users`...), each ``routes(admin)``: its
  ``(method, pattern, handler, audit action)`` rows; handlers call the gateway's
  services on the :class:`~gateway.context.GatewayContext` and never see HTTP.
- :class:`~.api.Admin` ties them over one context; the HTTP door
  (:mod:`gateway.http.admin`) routes ``/v1/admin/...`` to it on the unified port, the
  ``http_port`` and the dedicated ``admin_port``.

This ``__init__`` imports nothing, so that the gateway (which records the address) and
the HTTP front end (which routes to it) import only the parts they use.
"""
