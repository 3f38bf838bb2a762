"""The Responses API: /v1/responses, stored responses, streamed events."""
