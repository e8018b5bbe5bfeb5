"""The asyncio flavour of the SDK (import from ``svc_sdk``)."""
