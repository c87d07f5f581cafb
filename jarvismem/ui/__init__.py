"""``jarvismem ui``: a read-only inspector of an agent's memory in the browser.

Pages: the workflows, a workflow's timeline (with the live tail), a step's state
and bundle, the long-term summary, an agent's spaces, recall, and health with
every outbox on the machine. Each page answers JSON from the same source
(:mod:`jarvismem.ui.data`). The web stack (Starlette, Jinja2, uvicorn) is the
``ui`` extra; :mod:`jarvismem.ui.app` imports it, this package does not.
"""
