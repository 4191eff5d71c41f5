"""Project settings over HTTP: the reference run."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from server.domain.names import ID_PATTERN


class ReferenceIn(BaseModel):
    run: str = Field(pattern=ID_PATTERN, description="A run of the project")


class ReferenceOut(BaseModel):
    """The run that alert notifications and the compare view measure the project's runs
    against."""

    model_config = ConfigDict(from_attributes=True)

    project: str
    run: str = Field(validation_alias="run_id")
    set_at: float
