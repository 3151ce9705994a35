"""The toy task of the "adding a task = one folder" check: its folder's files as text, written
into a copy of the package by `tests/evaluators/test_adding_a_task.py` and into a clone by
`bench/touch_count.py` (which counts the touches). Text only: importing this loads nothing."""

TOY_TASK_FILES = {
    "__init__.py": '''
        """A toy task: the model is asked to repeat a word."""

        from evaluators.registry import Task
        from evaluators.toy.options import ToyOptions

        REGISTER = (Task(ToyOptions, "evaluators.toy.evaluator:ToyEvaluator", "repeat a word, exact match"),)
    ''',
    "options.py": '''
        from typing import ClassVar

        from evaluators.options import Int, TaskOptions, option


        class ToyOptions(TaskOptions):
            task: ClassVar[str] = "toy"

            words: Int(ge=1, le=4) = option(2, "how many words the model is asked to repeat", selects=True)
    ''',
    "evaluator.py": '''
        from checkpoints.engine import GenerateRequest
        from evaluators.task import Built, Evaluator, Sample
        from evaluators.results import TaskResult, metric
        from evaluators.toy.options import ToyOptions

        WORDS = ("apple", "river", "stone", "cloud")


        class ToyEvaluator(Evaluator):
            name = "toy"
            version = "1"
            Options = ToyOptions

            def plan(self, loaded):
                return [Sample(id=w, params={"word": w}) for w in WORDS[: self.options.words]]

            def build(self, loaded, sample):
                ids = tuple(loaded.tokenizer.encode(f"Repeat: {sample.params['word']}\\n"))
                return Built(sample, GenerateRequest(ids, max_new_tokens=3), {"prompt_tokens": len(ids),
                                                                              "truncated": False})

            def score(self, built, response):
                word = built.sample.params["word"]
                return {"prediction": response.text, "references": [word],
                        "score": float(response.text.strip() == word)}

            def aggregate(self, records):
                value = sum(r["score"] for r in records) / len(records)
                return TaskResult(headline="exact_match", summary=f"toy exact match {value:.2f}",
                                  metrics=[metric("exact_match", value, True, "fraction", len(records))])
    ''',
}
