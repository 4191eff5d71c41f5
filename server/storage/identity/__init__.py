"""Identity as stored: people and their project mappings (`people`), API tokens (`tokens`,
`personal_tokens`), dashboard sessions (`sessions`) and the secrets the server makes for itself
(`secrets`).
"""
