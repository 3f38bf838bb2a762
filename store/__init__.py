"""The model store: the files of models on this machine, read by the gateway and the
workers alike.

Pure file formats and folders, one floor down beside the protocol: the gateway's
cache folder (cache.py), the Ollama store (ollama_store.py: names, manifests, blobs;
ollama_pull.py: a pull from Ollama's registry into the gateway's own store), GGUF
files (gguf_header.py: the header and tensor table, the bytes a conversion takes;
gguf_files.py: where a GGUF model's files and its conversion live) and the
CTranslate2 Whisper converter (whisper_convert.py, NumPy only, imported lazily by
``mlx-gateway convert-whisper``). It imports nothing of the gateway or the workers
and never imports MLX.
"""
