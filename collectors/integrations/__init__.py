"""Recipes for trainers, as code the tests run: `trl` (a transformers `TrainerCallback`),
`verl` (a tracking backend and a one-line call), `skyrl` (a wrapper around SkyRL's tracker),
`roll` (a ROLL tracker), `prime_rl` (a prime-rl monitor) and `areal` (one-line calls for AReaL
and RLinf, which have no logger backend to plug into). Each module imports its framework only
when it is itself imported, so `import collectors` never pulls a framework in."""
