"""The Flight SQL commands: protobuf messages declared here with the field numbers of Arrow's ``FlightSql.proto``.

Why the ``protobuf`` package and not hand encoding: a client's command is
hostile input, and protobuf's own decoder handles every wire case a hand
decoder would have to get right (unknown fields, repeated and packed
fields, varints past 64 bits, truncated buffers) and says ``DecodeError``
for the rest. Why declared here and not generated: the few messages we use
are a table below (name, field number, type, label), built into a private
descriptor pool at import, so there is no protoc step and no generated code
to keep in step with a protobuf release. The numbers are the protocol: they
never change, whatever release of Arrow a client was built with. Commands
travel packed in ``google.protobuf.Any`` whose type URL names the message.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

__all__ = ["PACKAGE", "MESSAGES", "message", "pack", "unpack", "command_name", "DecodeError", "Message"]

PACKAGE = "arrow.flight.protocol.sql"
_URL_PREFIX = "type.googleapis.com/"

# (field name, number, type, label): label "optional" is proto3's explicit presence (an empty string sent is
# not the field left out: "catalog = ''" asks for tables without a catalog, no catalog asks for all of them)
_S, _B, _BOOL, _U32, _I32, _I64 = "string", "bytes", "bool", "uint32", "int32", "int64"
_SCHEMA: dict[str, list[tuple[str, int, str, str]]] = {
    "CommandGetSqlInfo": [("info", 1, _U32, "repeated")],
    "CommandGetXdbcTypeInfo": [("data_type", 1, _I32, "optional")],
    "CommandGetCatalogs": [],
    "CommandGetDbSchemas": [("catalog", 1, _S, "optional"), ("db_schema_filter_pattern", 2, _S, "optional")],
    "CommandGetTables": [("catalog", 1, _S, "optional"), ("db_schema_filter_pattern", 2, _S, "optional"),
                         ("table_name_filter_pattern", 3, _S, "optional"), ("table_types", 4, _S, "repeated"),
                         ("include_schema", 5, _BOOL, "")],
    "CommandGetTableTypes": [],
    "CommandGetPrimaryKeys": [("catalog", 1, _S, "optional"), ("db_schema", 2, _S, "optional"),
                              ("table", 3, _S, "")],
    "CommandGetExportedKeys": [("catalog", 1, _S, "optional"), ("db_schema", 2, _S, "optional"),
                               ("table", 3, _S, "")],
    "CommandGetImportedKeys": [("catalog", 1, _S, "optional"), ("db_schema", 2, _S, "optional"),
                               ("table", 3, _S, "")],
    "CommandGetCrossReference": [("pk_catalog", 1, _S, "optional"), ("pk_db_schema", 2, _S, "optional"),
                                 ("pk_table", 3, _S, ""), ("fk_catalog", 4, _S, "optional"),
                                 ("fk_db_schema", 5, _S, "optional"), ("fk_table", 6, _S, "")],
    "ActionCreatePreparedStatementRequest": [("query", 1, _S, ""), ("transaction_id", 2, _B, "optional")],
    "ActionCreatePreparedStatementResult": [("prepared_statement_handle", 1, _B, ""), ("dataset_schema", 2, _B, ""),
                                            ("parameter_schema", 3, _B, "")],
    "ActionClosePreparedStatementRequest": [("prepared_statement_handle", 1, _B, "")],
    "CommandStatementQuery": [("query", 1, _S, ""), ("transaction_id", 2, _B, "optional")],
    "TicketStatementQuery": [("statement_handle", 1, _B, "")],
    "CommandPreparedStatementQuery": [("prepared_statement_handle", 1, _B, "")],
    "CommandStatementUpdate": [("query", 1, _S, ""), ("transaction_id", 2, _B, "optional")],
    "CommandPreparedStatementUpdate": [("prepared_statement_handle", 1, _B, "")],
    "DoPutUpdateResult": [("record_count", 1, _I64, "")],
    "DoPutPreparedStatementResult": [("prepared_statement_handle", 1, _B, "optional")],
    # deprecated since Arrow 13 in favour of Flight's own CancelFlightInfo, still sent by older clients
    "ActionCancelQueryRequest": [("info", 1, _B, "")],
    "ActionCancelQueryResult": [("result", 1, _I32, "")],
    # Flight's own (package arrow.flight.protocol): CancelFlightInfoRequest {FlightInfo info = 1} and its result.
    # An embedded message is length-delimited on the wire exactly like bytes, so ``info`` is the FlightInfo's
    # serialized form, which pyarrow reads (FlightInfo.deserialize)
    "CancelFlightInfoRequest": [("info", 1, _B, "")],
    "CancelFlightInfoResult": [("status", 1, _I32, "")],
}
#: the commands iqgate recognises but refuses with UNIMPLEMENTED (transactions, Substrait, session options)
REFUSED = ("CommandStatementSubstraitPlan", "ActionCreatePreparedSubstraitPlanRequest", "ActionBeginTransactionRequest",
           "ActionBeginSavepointRequest", "ActionEndTransactionRequest", "ActionEndSavepointRequest")
#: writes, refused as READ_ONLY like every other write
WRITES = ("CommandStatementIngest",)

_TYPES = {
    _S: descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    _B: descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
    _BOOL: descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    _U32: descriptor_pb2.FieldDescriptorProto.TYPE_UINT32,
    _I32: descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    _I64: descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
}


def _file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="iqgate/flight_sql.proto", package=PACKAGE, syntax="proto3")
    for name, fields in _SCHEMA.items():
        m = f.message_type.add(name=name)
        for fname, number, ftype, label in fields:
            fd = m.field.add(name=fname, number=number, type=_TYPES[ftype], json_name=fname)
            if label == "repeated":
                fd.label = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
            else:
                fd.label = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
            if label == "optional":  # proto3 explicit presence: a synthetic one-field oneof named "_<field>"
                fd.proto3_optional = True
                fd.oneof_index = len(m.oneof_decl)
                m.oneof_decl.add(name="_" + fname)
    return f


_POOL = descriptor_pool.DescriptorPool()
_FILE = _POOL.Add(_file())
MESSAGES: dict[str, type[Message]] = {
    name: message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}")) for name in _SCHEMA
}


def message(name: str, **fields: Any) -> Message:
    """A new message of the type ``name`` (a key of MESSAGES)."""
    return MESSAGES[name](**fields)


def pack(msg: Message) -> bytes:
    """``msg`` in a ``google.protobuf.Any``, serialized: what a FlightDescriptor's cmd, a ticket or a result holds."""
    box = any_pb2.Any()
    box.Pack(msg)
    return box.SerializeToString()


def command_name(raw: bytes) -> tuple[str, bytes]:
    """(the Flight SQL message an Any holds, by its short name, and its value bytes); a type of another package
    keeps its full name (so it matches no command); DecodeError for bytes that are not an Any."""
    box = any_pb2.Any()
    box.ParseFromString(raw)
    full = box.type_url.rsplit("/", 1)[-1]
    package, _, name = full.rpartition(".")
    return (name if package == PACKAGE else full), box.value


def unpack(name: str, value: bytes) -> Message:
    """The message ``name`` decoded from ``value`` (DecodeError when it does not decode)."""
    msg = MESSAGES[name]()
    msg.ParseFromString(value)
    return msg
