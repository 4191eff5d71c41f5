"""One module per page: `layout(query, params, **)` and `register(app, query, **)`."""
