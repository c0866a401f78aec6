"""What the project's two HTTP services (the query API, :mod:`serving.api.app`, and the reward service,
:mod:`rl.reward.service`) share.

:mod:`serving.http.app` builds a service's app (the probes ``/healthz``, ``/readyz`` and ``/metrics``,
and the one-line 422 of a request that fails validation) and holds the one error shape;
:mod:`serving.http.limit` the limit on requests in flight (429 with ``Retry-After``), free of any web
framework; :mod:`serving.http.server` a uvicorn server in a background thread. This file imports none of
them, so that :mod:`serving.http.limit` stays light.
"""
