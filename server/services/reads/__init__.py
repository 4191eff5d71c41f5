"""The read side: one service per thing read (`runs`, `series`, `hardware`, `run_view`,
`attribution`, `changes`, `exports`, `incidents`, `rules`), each taking the reader's `ReadScope`
first and answering read-models (`server.domain.reads`). `port.Reads` holds them together, as
the API's routes and the dashboard read them.
"""
