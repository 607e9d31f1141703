"""The OpenAI API's wire format: a chat or completion request read as the engine's
`GenerateRequest`, and a trace written back as OpenAI's response, chunks and errors. Pure
functions; the HTTP routes live in app/openai_routes.py."""
