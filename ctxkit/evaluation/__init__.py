"""The evaluation harness (``harness``) and its Markdown/PNG rendering (``report``)."""
