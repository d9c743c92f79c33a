"""The answer budget every front end shares when a request names none (the chat, generation, the server),
in a module without MLX so that a command's ``--help`` stays fast."""

DEFAULT_MAX_TOKENS = 256

#: Highest sampling temperature any front end accepts (0 = greedy); the OpenAI API's own limit.
MAX_TEMPERATURE = 2.0
