"""Request handlers of the broker, one module per concern; each exposes handlers(ctx) -> {code: handler}."""
