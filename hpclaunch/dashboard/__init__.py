"""`hpclaunch dashboard`: a local web server showing the registry's jobs and, per job, its state,
ranks' progress and the monitor's power, temperature, CPU and memory series, live (docs/dashboard.md).

A top-layer feature: it reads the registry and the backends (hpclaunch.runs), the run directories
and the monitor logs (through hpclaunch.reports' readers). Its third-party parts (aiohttp,
aiohttp-sse, plotly's JS) are the `[dashboard]` extra, imported only when the command runs.
"""
