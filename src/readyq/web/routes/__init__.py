"""The dashboard's routes, one module per page or group of routes, each with a
``routes(context)`` that builds its routes from a :class:`~readyq.web.dashboard.DashboardContext`.
A page's JSON twin under ``/api/`` lives with the page: both read the same data."""
