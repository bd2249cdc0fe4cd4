from sharedesk.protocol import (
    Agent,
    Operator,
    Person,
    System,
    author_key,
    author_label,
    same_participant,
)


class TestAuthorKey:
    def test_each_kind_has_its_own_key(self) -> None:
        keys = [
            author_key(a) for a in (Operator(), Person("x", "X"), Agent("x", "X"), System("x", "X"))
        ]

        assert ["operator", "person:x", "agent:x", "system:x"] == keys

    def test_a_relabelled_participant_is_the_same_participant(self) -> None:
        assert same_participant(Agent("a", "Ada"), Agent("a", "Ada v2"))

    def test_a_person_and_an_agent_with_one_id_are_different_participants(self) -> None:
        assert not same_participant(Person("a", "A"), Agent("a", "A"))

    def test_authors_are_frozen_and_hashable(self) -> None:
        assert len({Agent("a", "A"), Agent("a", "A"), Operator()}) == 2


class TestAuthorLabel:
    def test_a_participant_is_shown_by_its_label(self) -> None:
        assert ["Ada", "Pat", "Audit"] == [
            author_label(a) for a in (Agent("a", "Ada"), Person("p", "Pat"), System("x", "Audit"))
        ]

    def test_without_a_label_a_participant_is_shown_by_its_id_and_a_system_by_its_kind(
        self,
    ) -> None:
        assert ["a", "p", "prompt", "operator"] == [
            author_label(a)
            for a in (Agent("a", ""), Person("p", ""), System("prompt", ""), Operator())
        ]
