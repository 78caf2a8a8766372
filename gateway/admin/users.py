"""Users, their tags and passwords, access keys, MQTT/RocketMQ ACL rules and AMQP
permissions: what ``lmq users`` edits, in the same users file (locked, changed, saved
atomically: :func:`gateway.auth.users.edit_users_file`), then loaded at once
(:meth:`gateway.security.Security.refresh`), so the next login and the next check see
the change. Secrets are never shown, except a generated secret key, once, in the
answer that created it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.admin.core import AdminError, Call, Result, page
from gateway.auth.acl import Access, AclRule, InvalidRule
from gateway.auth.passwords import hash_password
from gateway.auth.users import (
    Permissions,
    UsersDatabase,
    UsersError,
    acl_rows,
    edit_users_file,
    generate_access_key,
    permission_rows,
    user_document,
    vhost_rows,
)
from gateway.security import users_path

if TYPE_CHECKING:
    from gateway.admin.api import Admin

SORTS = ("name",)


def routes(admin: Admin) -> list[tuple[str, str, Any, str]]:
    ctx = admin.ctx
    path = users_path(ctx.config)

    def read() -> UsersDatabase:
        if not path.exists():
            return UsersDatabase()
        try:
            return UsersDatabase.load(path)
        except UsersError as exc:
            raise AdminError(500, f"the users file cannot be read: {exc}") from None

    async def edit(change: Callable[[UsersDatabase], Any], field: str | None = None) -> Any:
        """Apply ``change`` to the file (in a thread: it locks and writes), then load it."""

        def run() -> Any:
            with edit_users_file(path) as db:
                return change(db)

        try:
            result = await asyncio.to_thread(run)
        except UsersError as exc:
            message = str(exc)
            status = 404 if "no user" in message or message.startswith("no ") else 400
            if "already" in message:
                status = 409
            raise AdminError(status, message, field=field) from None
        await ctx.security.refresh()
        return result

    async def list_(call: Call) -> dict[str, Any]:
        db = await asyncio.to_thread(read)
        return page((user_document(db, n) for n in db.users), call.paging(SORTS, "name"))

    async def show(call: Call) -> dict[str, Any]:
        name = call.params["user"]
        db = await asyncio.to_thread(read)
        if name not in db.users:
            raise AdminError(404, f"no user {name!r}", field="user")
        doc = user_document(db, name)
        doc["acl"] = [str(rule) for rule in db.acl.get(name, [])]
        doc["permissions"] = {
            vhost: {"configure": p.configure, "write": p.write, "read": p.read}
            for vhost, p in db.permissions.get(name, {}).items()
        }
        return doc

    async def hashed_password(call: Call) -> str | None:
        """The body's ``password`` hashed (None when not given); never empty."""
        password = call.text("password")
        if password == "":
            raise AdminError(400, "password must not be empty", field="password")
        return None if password is None else await asyncio.to_thread(hash_password, password)

    async def put(call: Call) -> Result:
        """Create the user, or change their password and/or tags."""
        name = call.params["user"]
        hashed = await hashed_password(call)
        tags = _strings(call, "tags")
        subjects = _strings(call, "certificate_subjects")

        def change(db: UsersDatabase) -> bool:
            if name in db.users:
                if hashed is not None:
                    db.set_password(name, hashed)
                if tags is not None:
                    db.set_tags(name, tuple(tags))
                return False
            db.add_user(name, hashed, tuple(tags or ()), tuple(subjects or ()))
            return True

        created = await edit(change, "user")
        db = await asyncio.to_thread(read)
        return Result(201 if created else 200, user_document(db, name))

    async def delete(call: Call) -> dict[str, Any]:
        name = call.params["user"]
        await edit(lambda db: db.delete_user(name), "user")
        return {"name": name, "deleted": True}

    async def add_key(call: Call) -> Result:
        name = call.params["user"]
        new_access, new_secret = generate_access_key()
        access_key = call.text("access_key") or new_access
        secret = call.text("secret_key")
        generated = secret is None
        secret = secret or new_secret
        await edit(lambda db: db.add_access_key(name, access_key, secret), "access_key")
        doc: dict[str, Any] = {"user": name, "access_key": access_key}
        if generated:
            doc["secret_key"] = secret  # shown once
        return Result(201, doc)

    async def delete_key(call: Call) -> dict[str, Any]:
        key = call.params["key"]
        owner = await edit(lambda db: db.delete_access_key(key), "key")
        return {"access_key": key, "user": owner, "deleted": True}

    async def acl_add(call: Call) -> Result:
        name = call.params["user"]
        access = call.text("access", required=True)
        topic_filter = call.text("filter", required=True)
        position = call.integer("position", low=1)
        assert access is not None and topic_filter is not None
        try:
            kind = Access(access)
        except ValueError:
            raise AdminError(
                400, "access must be one of " + ", ".join(a.value for a in Access), field="access"
            ) from None
        try:
            rule = AclRule(kind, topic_filter)
        except InvalidRule as exc:
            raise AdminError(400, str(exc), field="filter") from None
        await edit(lambda db: db.add_acl_rule(name, rule, position), "position")
        return Result(201, {"user": name, "rule": str(rule)})

    async def acl_remove(call: Call) -> dict[str, Any]:
        name = call.params["user"]
        raw = call.params["position"]
        if not raw.isdigit() or int(raw) < 1:
            raise AdminError(400, "position must be a rule's number (from 1)", field="position")
        rule = await edit(lambda db: db.remove_acl_rule(name, int(raw)), "position")
        return {"user": name, "removed": str(rule)}

    async def set_permissions(call: Call) -> dict[str, Any]:
        name, vhost = call.params["user"], call.params["vhost"]
        try:
            perms = Permissions(
                call.text("configure", "") or "",
                call.text("write", "") or "",
                call.text("read", "") or "",
            )
        except UsersError as exc:  # "<kind> permission ... is not a regex"
            raise AdminError(400, str(exc), field=str(exc).split()[0]) from None
        await edit(lambda db: db.set_permissions(name, vhost, perms), "vhost")
        return {
            "user": name,
            "vhost": vhost,
            "configure": perms.configure,
            "write": perms.write,
            "read": perms.read,
        }

    async def clear_permissions(call: Call) -> dict[str, Any]:
        name, vhost = call.params["user"], call.params["vhost"]
        await edit(lambda db: db.clear_permissions(name, vhost), "vhost")
        return {"user": name, "vhost": vhost, "cleared": True}

    async def add(call: Call) -> Result:
        """Create a user (409 if the name is taken), with an access key if given: what
        ``lmq users add`` does, in one change of the file."""
        name = call.text("name", required=True)
        assert name is not None
        hashed = await hashed_password(call)
        tags = _strings(call, "tags")
        subjects = _strings(call, "certificate_subjects")
        access_key = call.text("access_key")
        secret = call.text("secret_key")
        if secret is not None and access_key is None:
            raise AdminError(400, "secret_key needs access_key", field="secret_key")
        generated = access_key is not None and secret is None
        if generated:
            secret = generate_access_key()[1]

        def change(db: UsersDatabase) -> None:
            try:
                db.add_user(name, hashed, tuple(tags or ()), tuple(subjects or ()))
            except UsersError as exc:
                raise AdminError(
                    409 if "already" in str(exc) else 400, str(exc), field="name"
                ) from None
            if access_key is not None:
                assert secret is not None
                db.add_access_key(name, access_key, secret)

        await edit(change, "access_key")
        db = await asyncio.to_thread(read)
        doc = user_document(db, name)
        doc["users_file"] = str(path)
        if generated:
            doc["secret_key"] = secret  # shown once
        return Result(201, doc)

    async def set_password(call: Call) -> dict[str, Any]:
        name = call.params["user"]
        if call.body.get("password") is None:
            raise AdminError(
                400, "password is required (DELETE the password to remove it)", field="password"
            )
        hashed = await hashed_password(call)
        await edit(lambda db: db.set_password(name, hashed), "user")
        return {"name": name, "password": True}

    async def remove_password(call: Call) -> dict[str, Any]:
        name = call.params["user"]
        await edit(lambda db: db.set_password(name, None), "user")
        return {"name": name, "password": False}

    async def set_tags(call: Call) -> dict[str, Any]:
        name = call.params["user"]
        tags = _strings(call, "tags")
        if tags is None:
            raise AdminError(400, "tags is required (a list; [] removes all)", field="tags")
        await edit(lambda db: db.set_tags(name, tuple(tags)), "tags")
        return {"name": name, "tags": tags}

    async def map_cert(call: Call) -> Result:
        name = call.params["user"]
        subject = call.text("subject", required=True)
        assert subject is not None
        mapped = await edit(lambda db: db.map_certificate(name, subject), "subject")
        return Result(201, {"user": name, "subject": mapped})

    async def unmap_cert(call: Call) -> dict[str, Any]:
        subject = call.params["subject"]
        owner = await edit(lambda db: db.unmap_certificate(subject), "subject")
        return {"subject": subject, "user": owner, "deleted": True}

    async def acl_list(call: Call) -> dict[str, Any]:
        db = await asyncio.to_thread(read)
        return {"items": acl_rows(db, call.query.get("user") or None)}

    async def permissions_list(call: Call) -> dict[str, Any]:
        db = await asyncio.to_thread(read)
        return {"items": permission_rows(db, call.query.get("vhost") or None)}

    async def vhosts_list(call: Call) -> dict[str, Any]:
        db = await asyncio.to_thread(read)
        return {"items": vhost_rows(db)}

    async def vhost_add(call: Call) -> Result:
        vhost = call.params["vhost"]
        description = call.text("description", "") or ""
        await edit(lambda db: db.add_vhost(vhost, description), "vhost")
        return Result(201, {"name": vhost, "description": description})

    async def vhost_delete(call: Call) -> dict[str, Any]:
        vhost = call.params["vhost"]
        await edit(lambda db: db.delete_vhost(vhost), "vhost")
        return {"name": vhost, "deleted": True}

    return [
        ("GET", "/users", list_, ""),
        ("POST", "/users", add, "user.add"),
        ("GET", "/users/{user}", show, ""),
        ("PUT", "/users/{user}", put, "user.put"),
        ("DELETE", "/users/{user}", delete, "user.delete"),
        ("POST", "/users/{user}/access-keys", add_key, "access_key.add"),
        ("DELETE", "/access-keys/{key}", delete_key, "access_key.delete"),
        ("POST", "/users/{user}/acl", acl_add, "acl.add"),
        ("DELETE", "/users/{user}/acl/{position}", acl_remove, "acl.remove"),
        ("PUT", "/users/{user}/permissions/{vhost}", set_permissions, "permissions.set"),
        ("DELETE", "/users/{user}/permissions/{vhost}", clear_permissions, "permissions.clear"),
        ("PUT", "/users/{user}/password", set_password, "password.set"),
        ("DELETE", "/users/{user}/password", remove_password, "password.remove"),
        ("PUT", "/users/{user}/tags", set_tags, "tags.set"),
        ("POST", "/users/{user}/certificates", map_cert, "certificate.map"),
        ("DELETE", "/certificates/{subject}", unmap_cert, "certificate.unmap"),
        ("GET", "/acl", acl_list, ""),
        ("GET", "/permissions", permissions_list, ""),
        ("GET", "/vhosts", vhosts_list, ""),
        ("PUT", "/vhosts/{vhost}", vhost_add, "vhost.add"),
        ("DELETE", "/vhosts/{vhost}", vhost_delete, "vhost.delete"),
    ]


def _strings(call: Call, name: str) -> list[str] | None:
    value = call.body.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AdminError(400, f"{name} must be a list of strings", field=name)
    return value
