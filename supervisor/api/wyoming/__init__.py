"""The Wyoming protocol server (``server.wyoming``): Home Assistant's speech services.

Home Assistant's voice assistant talks to speech-to-text and text-to-speech services
through Wyoming (JSON event headers with binary payloads over TCP). This server
offers the gateway's whisper models as speech to text and its tts models as text to
speech; every request goes through the same model handles (admission, memory
budget, idle reaping, metrics) as an HTTP request.
"""
