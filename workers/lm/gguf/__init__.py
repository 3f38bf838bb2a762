"""GGUF models (llama.cpp's format, Ollama's and LM Studio's stores) converted once
into mlx-lm folders: :mod:`.source` finds the file, :mod:`.arch` maps its
architecture, :mod:`.tensors` its weights, :mod:`.tokenizer` its tokenizer and chat
template, and :mod:`.convert` writes the folder."""
