"""The run explorer: a web page per run, served by ``runtrail ui`` (Starlette on uvicorn).

It answers the operator's three questions after the fact (what happened, can we resume it,
can we prove it) by reading the services' own stores through their public openers
(:mod:`runtrail_tools.ui.sources`), never a copy. Everything it serves ships in this package
(HTML rendered here, one JS and one CSS file under ``static/``): no CDN, works offline.
"""
