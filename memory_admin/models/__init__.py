from memory_admin.models.access import FactRead
from memory_admin.models.checkpoints import Checkpoint, CheckpointWrite, StoreItem, StoreVector
from memory_admin.models.entities import Entity, EntityBackfill, EntityDrawing, FactEntity, Relation, RelationEnd
from memory_admin.models.entity_curation import EntityMerge, EntityMergeReview
from memory_admin.models.imports import ImportedItem
from memory_admin.models.knowledge import (
    ChunkEntity,
    KnowledgeChunk,
    KnowledgeDocument,
    KnowledgeSettings,
    KnowledgeSource,
)
from memory_admin.models.memory import (
    EMBEDDING_DIM,
    Edge,
    Episode,
    Fact,
    Message,
    Notebook,
    NotebookChunk,
    NotebookRevision,
    Skill,
    SkillRevision,
    Thread,
    WriteOutcome,
)
from memory_admin.models.ops import Heartbeat
from memory_admin.models.review import AuditEvent, Contradiction, ExtractionBatch, LlmCall, PiiBlock
from memory_admin.models.tenancy import (
    PII_ACTIONS,
    PII_KINDS,
    Agent,
    ApiKey,
    Membership,
    MemoryUser,
    Tenant,
    TenantSettings,
)
from memory_admin.models.throttle import ThrottleWindow
from memory_admin.models.usage import UsageDay

__all__ = [
    "EMBEDDING_DIM",
    "PII_ACTIONS",
    "PII_KINDS",
    "Agent",
    "ApiKey",
    "AuditEvent",
    "Checkpoint",
    "ChunkEntity",
    "CheckpointWrite",
    "Contradiction",
    "Edge",
    "Entity",
    "EntityBackfill",
    "EntityDrawing",
    "EntityMerge",
    "EntityMergeReview",
    "Episode",
    "ExtractionBatch",
    "Fact",
    "FactRead",
    "FactEntity",
    "Heartbeat",
    "ImportedItem",
    "KnowledgeChunk",
    "KnowledgeDocument",
    "KnowledgeSettings",
    "KnowledgeSource",
    "LlmCall",
    "MemoryUser",
    "Membership",
    "Message",
    "Notebook",
    "NotebookChunk",
    "NotebookRevision",
    "PiiBlock",
    "Relation",
    "RelationEnd",
    "Skill",
    "SkillRevision",
    "StoreItem",
    "StoreVector",
    "Tenant",
    "TenantSettings",
    "Thread",
    "ThrottleWindow",
    "UsageDay",
    "WriteOutcome",
]
