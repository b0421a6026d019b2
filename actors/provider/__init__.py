"""Model providers: the interface (`base`), the actor running one, the OpenAI-compatible and scripted ones."""
