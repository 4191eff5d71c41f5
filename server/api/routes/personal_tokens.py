"""A person's own API tokens (/api/v1/me/tokens): made, listed and revoked by the signed-in
person, each acting with that person's project mappings at each request
(`server.identity.personal_tokens`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from server.api.deps import ReaderDep, ServicesDep
from server.domain.identity import Person
from server.errors import Forbidden
from server.identity.personal_tokens import PersonalTokens
from server.schemas.identity import PersonalTokenCreatedOut, PersonalTokenIn, PersonalTokenOut
from server.schemas.reads import ListOut

router = APIRouter(prefix="/api/v1/me/tokens", tags=["people"])


def get_personal(services: ServicesDep) -> PersonalTokens:
    return services.people.personal


def get_person(principal: ReaderDep) -> Person:
    """The person calling, signed in or named by the proxy (their tokens are theirs by id,
    never by a name they chose): machine tokens and open servers have no personal tokens."""
    if principal.person is None:
        raise Forbidden("personal tokens belong to a person: sign in as yourself first")
    return principal.person


PersonalDep = Annotated[PersonalTokens, Depends(get_personal)]
PersonDep = Annotated[Person, Depends(get_person)]


@router.post("", response_model=PersonalTokenCreatedOut, status_code=201)
def create_personal_token(
    body: PersonalTokenIn, personal: PersonalDep, person: PersonDep, principal: ReaderDep
) -> PersonalTokenCreatedOut:
    """A token of your own for scripts: it reads and administers what your mappings allow,
    at each request, and stops working when they are removed. Made from a sign-in, not
    from another token."""
    assert principal.person == person  # `person` refused machine tokens and open servers
    made, token = personal.create(by=principal, name=body.name)
    return PersonalTokenCreatedOut.model_validate({**made.__dict__, "token": token})


@router.get("", response_model=ListOut[PersonalTokenOut])
def list_personal_tokens(personal: PersonalDep, person: PersonDep) -> ListOut[PersonalTokenOut]:
    """Your personal tokens that still count (never their secrets)."""
    found = personal.list(owner=person.id)
    data = [PersonalTokenOut.model_validate(t.__dict__) for t in found]
    return ListOut(data=data, count=len(data))


@router.delete("/{personal_id}", response_model=PersonalTokenOut)
def revoke_personal_token(
    personal_id: str, personal: PersonalDep, person: PersonDep
) -> PersonalTokenOut:
    """Revoke one of your personal tokens; requests with it are refused from then on."""
    revoked = personal.revoke(personal_id, owner=person.id)
    return PersonalTokenOut.model_validate(revoked.__dict__)
