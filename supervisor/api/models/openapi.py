"""What ``GET /openapi.json`` says about the models surface's routes (the model list,
load/unload/pin/fit, adapters, health, metrics and the description itself), and the
components it writes by hand (``Model``, ``ModelList``, ``MemoryBudget``)."""

from __future__ import annotations

from mlx_gateway.supervisor.api.models.adapters import MountRequest
from mlx_gateway.supervisor.api.models.admin import LoadOptions, PinOptions, UnloadOptions
from mlx_gateway.supervisor.http.openapi import JSON_OBJECT, REF, TEXT, OpenApi, Operation

_MODEL_LIST = {"$ref": REF.format(name="ModelList")}
_MODEL = {"$ref": REF.format(name="Model")}


def _admin(operation_id: str, summary: str, options: type, statuses: tuple[int, ...]) -> Operation:
    """A model's admin action: its options optional, the model as the answer."""
    return Operation(
        operation_id,
        summary,
        request=options,
        optional_body=True,
        extra={"application/json": {"schema": _MODEL}},
        statuses=statuses,
    )


OPENAPI = OpenApi(
    {
        ("POST", "/v1/models/{model_id}/load"): _admin(
            "loadModel",
            "Start the model now (an admin endpoint); clears a failure backoff. force: true "
            "starts it past a refusal of the memory budget.",
            LoadOptions,
            (400, 404, 503),
        ),
        ("GET", "/v1/models/{model_id}/fit"): Operation(
            "modelFit",
            "Would the model fit in the memory budget now: its need, the free budget, the idle "
            "models a load evicts, the busy or pinned ones that block it, what force would do.",
            extra=JSON_OBJECT,
            statuses=(404,),
        ),
        ("POST", "/v1/models/{model_id}/unload"): _admin(
            "unloadModel",
            "Stop the model (an admin endpoint); 409 while busy unless force is true.",
            UnloadOptions,
            (400, 404, 409),
        ),
        ("POST", "/v1/models/{model_id}/pin"): _admin(
            "pinModel",
            "Pin (never evict) or unpin the model at run time (an admin endpoint).",
            PinOptions,
            (400, 404),
        ),
        ("GET", "/v1/adapters"): Operation(
            "listAdapters",
            "The LoRA adapters of the language models (an admin endpoint); ?model= for one.",
            extra=JSON_OBJECT,
            statuses=(404,),
        ),
        ("POST", "/v1/adapters"): Operation(
            "mountAdapter",
            "Mount a LoRA adapter on a language model at run time (an admin endpoint).",
            request=MountRequest,
            extra=JSON_OBJECT,
            statuses=(400, 404, 409),
        ),
        ("DELETE", "/v1/adapters/{adapter_id}"): Operation(
            "unmountAdapter",
            "Unmount a LoRA adapter (an admin endpoint); ?model= names the model.",
            extra=JSON_OBJECT,
            statuses=(400, 404, 409),
        ),
        ("GET", "/v1/models"): Operation(
            "listModels",
            "Every served model with its live state.",
            extra={"application/json": {"schema": _MODEL_LIST}},
            statuses=(),
        ),
        ("GET", "/v1/models/{model_id}"): Operation(
            "retrieveModel",
            "One model by served name or alias (the id may contain '/').",
            extra={"application/json": {"schema": _MODEL}},
            statuses=(404,),
        ),
        ("GET", "/health"): Operation(
            "health",
            "The gateway answers; each model's state. Never needs a key.",
            extra=JSON_OBJECT,
            statuses=(),
        ),
        ("GET", "/metrics"): Operation(
            "metrics",
            "Prometheus text format (an admin endpoint).",
            extra=TEXT,
            statuses=(),
        ),
        ("GET", "/openapi.json"): Operation(
            "openapi",
            "This description.",
            extra=JSON_OBJECT,
            statuses=(),
        ),
    },
    {
        "Model": {
            "type": "object",
            "required": ["id", "object", "created", "owned_by"],
            "properties": {
                "id": {"type": "string"},
                "object": {"const": "model"},
                "created": {"type": "integer"},
                "owned_by": {"type": "string"},
                "state": {"type": "string"},
                "memory_need": {"type": ["integer", "null"]},
                "memory_need_source": {
                    "enum": ["measured", "configured", "estimated", "unknown"],
                },
            },
        },
        "ModelList": {
            "type": "object",
            "required": ["object", "data"],
            "properties": {
                "object": {"const": "list"},
                "data": {"type": "array", "items": _MODEL},
                "memory": {"$ref": REF.format(name="MemoryBudget")},
            },
        },
        "MemoryBudget": {
            "type": "object",
            "description": "Bytes: the memory budget, the needs of the resident models, "
            "and what is left (negative when over).",
            "required": ["budget", "reserved", "free"],
            "properties": {
                "budget": {"type": "integer"},
                "reserved": {"type": "integer"},
                "free": {"type": "integer"},
            },
        },
    },
)
