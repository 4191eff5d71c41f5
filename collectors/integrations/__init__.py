"""Recipes for trainers, as code the tests run: `trl` (a transformers `TrainerCallback`) and
`verl` (a tracking backend and a one-line call). Each module imports its framework only when
it is itself imported, so `import collectors` never pulls a framework in."""
